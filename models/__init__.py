"""The model zoo: one directory per model with its prototxts (see models/README.md).

Being a package lets the generator run as `python -m models.generate` from the repository
root and lets tests import it; nothing here is installed with the `caffe` package.
"""
