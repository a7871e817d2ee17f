"""Staged pretraining with Lightning: base, continued pretraining, MTP, long context, SFT. Not RL."""
