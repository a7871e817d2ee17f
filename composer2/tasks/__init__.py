"""Coding tasks and their judge: the task record, synthetic and long-horizon suites, c2bench v1/v2, suites by
name, the judge that runs a task's tests outside the code's reach. Not the agent that solves them."""
