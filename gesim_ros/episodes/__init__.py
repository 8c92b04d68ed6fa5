"""Episodes: the runner, its terminal CLI, episode data and recordings, lab-run."""
