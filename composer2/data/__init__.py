"""The corpus: real code and prose found on the machine, the tokenizer, token shards. Not training."""
