"""Studies that reproduce the report: the registry and what a study notebook calls, the papermill runner and
results index, dispatch to Slurm through submitit. Not the statistics (`composer2.stats`) or run records
(`composer2.runs`)."""
