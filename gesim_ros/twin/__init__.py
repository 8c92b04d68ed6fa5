"""The MuJoCo twin of the G2: scene, tasks, physics, scripted controllers, contract streams, node, records."""
