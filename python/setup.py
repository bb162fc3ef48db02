"""setup.py -- the setuptools entry point pip's legacy (non-isolated) build
calls; everything is declared in setup.cfg."""
from setuptools import setup

setup()
