"""Memory lifecycle jobs: consolidation into history.jsonl and Dream into the memory files."""
