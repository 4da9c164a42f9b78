"""The experiment harness: the paper's protocol on real data, tuned, repeated, reported.

One concept per module: ``workloads`` (data, model, augmentation, target), ``registry``
(a workload by built-in name or by import string, and its fingerprint), ``models``,
``conditions`` (variant, factor, batch size, buffer), ``protocol`` (the grids per
budget), ``search`` (quasi-random settings), ``trial`` (one training trial), ``crossing``
(when a curve reaches the target), ``record``/``store`` (the resumable JSON-lines
store), ``sweep`` (parallel, resumable execution), ``analysis`` (seed spreads and
same-seed ratios), ``verdict`` (the rules), ``findings``, ``text`` (number formats and
Markdown tables), ``figures``/``report`` (the Markdown report) and ``cli``.

Import from the module that owns a name. This package imports none of them, so the
torch-free ones (``store``, ``crossing``, ``analysis``, ``text``, ...) import without
torch.

Example:
    >>> from dataecho.experiments.protocol import plan
    >>> plan("lm", "full").trials
    8
"""
