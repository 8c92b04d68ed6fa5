from glob import glob

from setuptools import find_packages, setup

PACKAGE = "gesim_ros"

# Node executables: one `main()` per node, as in ros2/demos.
NODES = {
    "topic_monitor": "gesim_ros.topic_monitor:main",
    "contract_publisher": "gesim_ros.contract_publisher:main",
    "comparator": "gesim_ros.comparator_node:main",
    "policy": "gesim_ros.policy_node:main",
    "episode_runner": "gesim_ros.episode_runner:main",
    "world_model": "gesim_ros.world_model_node:main",
    "backend_switch": "gesim_ros.backend_switch:main",
    "g2_twin": "gesim_ros.twin_node:main",
}

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={PACKAGE: ["contracts/*.yaml", "models/*.pt"]},
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
            "learned = gesim_ros.learned_world_model:LearnedWorldModel",
            "kinematic = gesim_ros.kinematic_world_model:KinematicWorldModel",
            "gesim_http = gesim_ros.gesim_http_backend:GeSimHttpWorldModel",
        ],
        "gesim_ros.policies": [
            "scripted = gesim_ros.policy_api:ScriptedPolicy.from_config",
            "torchscript = gesim_ros.policy_api:TorchScriptPolicy.from_config",
            "module = gesim_ros.policy_api:policy_from_factory",
        ],
    },
)
