"""The judges shipped with gesim_ros, one module each, registered in entry-point group
``gesim_ros.judges`` (see :func:`gesim_ros.world_model.api.load_judge`): ``backend`` (the backend's
own judge), ``none`` (no judge: outcome unknown) and ``gesim_reward_http`` (a reward model behind
GE-Sim-V2's reward interface, over HTTP). :mod:`.reward_client` turns any judge into a GE-Sim-V2
``RewardClient``."""
