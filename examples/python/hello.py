"""Ray's first program on nodeup: change only the import line.

Run against a node on this machine (`nodeup start --head`):
    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/hello.py
"""

import nodeup as ray

ray.init()


@ray.remote
def square(x):
    return x * x


@ray.remote(num_returns=2)
def divmod_remote(a, b):
    return divmod(a, b)


refs = [square.remote(i) for i in range(4)]
squares = ray.get(refs)
assert squares == [0, 1, 4, 9], squares

q, r = ray.get(list(divmod_remote.remote(17, 5)))
assert (q, r) == (3, 2), (q, r)

big = ray.put(list(range(100_000)))
assert ray.get(square.remote(len(ray.get(big)))) == 10_000_000_000

print("squares", squares, "divmod", q, r, "cluster CPUs", ray.cluster_resources().get("CPU"))
ray.shutdown()
