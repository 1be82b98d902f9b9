"""What a claim declares: its thresholds, sizes, revisions, axes, and the frozen `Claim`."""
