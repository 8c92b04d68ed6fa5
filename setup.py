from glob import glob

from setuptools import find_packages, setup

PACKAGE = "gesim_ros"

# Node executables: one `main()` per node, as in ros2/demos.
NODES = {
    "topic_monitor": "gesim_ros.tools.topic_monitor:main",
    "contract_publisher": "gesim_ros.tools.synthetic_g2:main",
    "comparator": "gesim_ros.comparator.node:main",
    "policy": "gesim_ros.policy.node:main",
    "episode_runner": "gesim_ros.episodes.runner:main",
    "world_model": "gesim_ros.world_model.node:main",
    "backend_switch": "gesim_ros.switch.node:main",
    "g2_twin": "gesim_ros.twin.node:main",
    "episode_replay": "gesim_ros.episodes.replay_node:main",
}

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["contract/profiles/*.yaml", "world_model/models/*.pt", "comparator/report/templates/*",
                           "episodes/lerobot_mappings/*.yaml"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.yaml")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="gesim_ros developers",
    maintainer_email="dev@gesim-ros.local",
    description="Robot-in-the-loop sim2real with world models on ROS 2 (AgiBot G2 topics).",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [f"{name} = {target}" for name, target in NODES.items()]
        + ["gesim-ros = gesim_ros.cli:main"],
        "gesim_ros.world_models": [
            "learned = gesim_ros.world_model.backends.learned:LearnedWorldModel",
            "kinematic = gesim_ros.world_model.backends.kinematic:KinematicWorldModel",
            "gesim_http = gesim_ros.world_model.backends.gesim_http:GeSimHttpWorldModel",
        ],
        "gesim_ros.judges": [
            "backend = gesim_ros.world_model.judges.backend:backend_judge",
            "none = gesim_ros.world_model.judges.none:no_judge",
            "gesim_reward_http = gesim_ros.world_model.judges.gesim_reward_http:GeSimRewardHttpJudge",
        ],
        "gesim_ros.policies": [
            "scripted = gesim_ros.policy.builtin:ScriptedPolicy.from_config",
            "torchscript = gesim_ros.policy.builtin:TorchScriptPolicy.from_config",
            "module = gesim_ros.policy.builtin:policy_from_factory",
        ],
    },
)
