"""The tools above both services: the CLI, the demo, the local stack, progress bars."""
