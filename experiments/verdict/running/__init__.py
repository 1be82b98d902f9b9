"""Running a claim: its folders, `results.json` and its schema, the runner, refits, history."""
