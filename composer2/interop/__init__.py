"""Hugging Face export and import of composer2 checkpoints. Not the model itself."""
