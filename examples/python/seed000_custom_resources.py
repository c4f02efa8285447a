"""Seed 000: custom resources ("TPU-v3") for a task and an actor, written as
for Ray; only the import line differs. The cluster must declare TPU-v3 on a
node (`nodeup start --head --resources TPU-v3=2`); e2e runs it on one.

    PYTHONPATH=$(nodeup python path) /usr/bin/python3 examples/python/seed000_custom_resources.py
"""

import nodeup as ray

ray.init()


@ray.remote(resources={"TPU-v3": 1})
def train_on_tpu():
    # This function will only run on a node that has at least 1 "TPU-v3" resource available.
    print("Training on TPU-v3!")
    return "Training complete"


# Launch the task
result = train_on_tpu.remote()
print(ray.get(result))
assert ray.get(result) == "Training complete"


@ray.remote(resources={"TPU-v3": 2})
class TPUModel:
    def __init__(self):
        print("TPUModel initialized, using 2 TPU-v3 resources.")

    def predict(self, data):
        print("Predicting using TPU-v3...")
        return "Prediction done"


# Instantiate the actor
model = TPUModel.remote()
# The seed calls model.predict("sample_data"), which Ray refuses (actor
# methods are called with .remote); this is the call it means.
prediction_result = ray.get(model.predict.remote("sample_data"))
print(prediction_result)
assert prediction_result == "Prediction done"

# While the actor holds both TPU-v3 units, the task stays pending: the
# scheduler counts the custom resource down and back up, as the seed says.
pending = train_on_tpu.remote()
ready, _ = ray.wait([pending], timeout=1.0)
assert not ready, "a task needing TPU-v3 ran while the actor held all of them"
ray.kill(model)
assert ray.get(pending, timeout=60) == "Training complete"
print("seed000: ok")
