"""Parallelism lab: hand-written DP / pipeline / tensor / ZeRO beside PyTorch's own.

Importing this package does not import torch; its catalogue and predicting models
(jobs.lab.catalogue, jobs.lab.predict) are safe for the web app.
"""
