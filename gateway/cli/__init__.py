"""The `omnimesh` command line: up, chat, demo-checkpoint."""
