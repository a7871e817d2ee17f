"""The agent harness: the tool-call protocol, search indexes, tools, rewards, policies and the episode loop. Not
the model (`composer2.model`) or its training (`composer2.rl`)."""
