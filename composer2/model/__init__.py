"""The MoE decoder, its KV caches, the decoding engine and server, checkpoints and likelihood evaluations. Not
training loops (`composer2.pretrain`, `composer2.rl`)."""
