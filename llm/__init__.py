"""Inference: model resolution (`models`), the engine contract (`engine`), the in-process transformers
engine (`hf_engine`), ChatML formatting with tools (`chat`) and the tool-call parser (`toolcalls`).

Submodules are imported explicitly (`from llm.hf_engine import HfEngine`); importing `llm` itself pulls in
nothing heavy.
"""
