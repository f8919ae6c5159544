"""The serving contract: what the API imports (encoder, vector index, bundle, docstore, ONNX/distilled query
encoders, report schema, errors, job submission, atomic files). Nothing here imports `training` or `app`."""
