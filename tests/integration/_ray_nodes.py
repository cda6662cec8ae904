"""A real Ray cluster of two nodes on this machine, the second unable to see the driver's files:

    with two_nodes(hidden=tmp_path / "driver") as nodes:
        run(["agenthub", "train", "--ray-address", nodes.address,
             'ray.learner_resources={"second_node": 1}', ...], env=ray_env())
        nodes.node_ids[SECOND]   # the second node's Ray node id (HEAD: the head's)
        nodes.stop_second()      # the second node lost (its raylet and actors killed)

A head (`ray start --head --block`, custom resource `head_node`) and a second node (`ray start
--address=... --block`, custom resource `second_node`), each with its own `num_cpus`
(`head_cpus`, `second_cpus`); the second in a private mount namespace where `hidden` is an
empty tmpfs. Leaving the block stops both, whatever happened. The implementation is shared
with `benchmarks/multi_node.py` (which may not import tests): `agenthub.testing._ray_nodes`.
"""

from agenthub.testing._ray_nodes import HEAD, SECOND, RayNodes, ray_env, two_nodes

__all__ = ["HEAD", "SECOND", "RayNodes", "ray_env", "two_nodes"]
