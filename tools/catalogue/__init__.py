"""Catalogue of the engines' KV-, memory- and scheduling messages (see README.md here)."""
