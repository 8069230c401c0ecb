"""The demo model: tiny GGUFs with random weights that llama.cpp loads, and their projectors.

Written by `sluicegate models make-demo`, on a fresh machine's first start
(`engines/model_files.py`), and by the tests and benches; no engine depends on them. They import
only numpy and gguf, so they sit in the lowest layer (docs/architecture.md, "Layering").
"""
