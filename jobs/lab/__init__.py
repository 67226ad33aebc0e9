"""Parallelism lab: hand-written DP / pipeline / tensor / ZeRO beside PyTorch's own.

Importing this package does not import torch; ``jobs.lab.registry`` is safe for the web app.
"""
