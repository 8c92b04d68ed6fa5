"""The G2 topic contract: topic names, types, rates, QoS, frames, joints, limits; message builders, image codec, transforms, command validation."""
