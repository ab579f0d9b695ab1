"""Negotiators: scripted, NegMAS, human, local language models and API models, built by spec string
(``registry.py``); what a language-model agent reads and how its replies are read (``format/``)."""
