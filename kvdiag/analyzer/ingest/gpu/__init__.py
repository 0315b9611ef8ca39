"""GPU snapshots: nvidia-smi's table, its query CSV and its XML."""
