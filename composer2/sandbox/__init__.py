"""bubblewrap sandboxes: safe paths, workspaces, host limits, the sandbox itself. Not what runs in them."""
