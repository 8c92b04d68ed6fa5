"""The world-model plugins shipped here: learned, kinematic, gesim_http (a GE-Sim client)."""
