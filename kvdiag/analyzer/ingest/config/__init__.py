"""Configuration: launch command lines and flags, the model's config.json."""
