"""Asynchronous RL: objectives and estimators, the trainer step, weight sync, rollouts, Ray actors, the driver.
Not the harness episodes run in (`composer2.agent`)."""
