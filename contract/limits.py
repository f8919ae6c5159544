"""Upper bounds of the numeric training and retrain options (TrainConfig, QueryRetrainConfig, and so every
retrain job): a job is refused at submission (422 naming the option, the bound in the OpenAPI spec) rather
than accepted and left to run away. Each bound is far past what a run on one machine can use, so it
refuses typos and hostile values (`max_steps: 2**70`, `lr: Infinity`), never a real recipe; floats are
finite (the models set allow_inf_nan=False).
"""

from __future__ import annotations

# passes over the training pairs (and a query-side run's patience): the recipes here use 1-4
# (bench/training/recipe_search.py); a thousand epochs of the largest corpus tried would run for months
MAX_EPOCHS = 1000
# texts in one step: 4,096 pairs of 512 tokens hold tens of GB of activations even with GradCache's slices
MAX_BATCH = 4096
# optimiser steps, and steps between evaluations: 10 million steps at the fastest step measured here
# (0.46 s, bench/results/train_step_cost.txt) are two months
MAX_STEPS = 10_000_000
# learning rates: Adam's steps are about lr in size; above 1 the weights of a unit-norm encoder are noise
MAX_LR = 1.0
MAX_WEIGHT_DECAY = 1.0  # AdamW's decoupled decay: at 1 a step can wipe a weight out
MAX_GRAD_NORM = 1e6  # a clipping threshold that large no longer clips; larger says nothing more
MAX_TEMPERATURE = 100.0  # cosine / τ over [-1, 1]: at τ = 100 every score is within 0.02 of the others
MAX_LORA_ALPHA = 4096.0  # LoRA's scale is alpha / rank (rank <= 256): 16x at the largest rank
MAX_NEGATIVES_PER_PAIR = 256  # mined negatives per pair, each a document encoded in the step
MAX_MARGIN = 2.0  # cosine scores differ by at most 2
MAX_SENTENCES_PER_DOC = 1000
# counts of pairs, queries, ranks and pools: ten million is past every corpus this service has been
# measured on (1M documents, bench/index/index_bench.py) by a factor of ten
MAX_COUNT = 10_000_000
# a retrain's wall-clock budget: a week is past the longest full retrain measured here (44 min at 15k documents,
# bench/results/retrain_scale_packages15k.txt) scaled to 1M documents
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0
MAX_SEED = 2**32 - 1  # numpy's legacy seeding takes 32 bits; torch takes 64
# frozen lower transformer layers: past the depth of the bases in use (all-MiniLM-L6-v2: 6, BERT-large: 24,
# 7B embedding models: 32); a model with fewer is refused by the trainer, naming its own count
MAX_FREEZE_LAYERS = 48
