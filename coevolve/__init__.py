"""CoEvolve: LLM agents trained with GRPO while their training data evolves with them (arXiv 2604.15840).

The repository's top-level folders are the subpackages of this namespace (`coevolve.flows`,
`coevolve.stages`, `coevolve.storage`, `coevolve.envs`, ...); this folder holds what every layer may
import: shared ids and small types (`coevolve.core`) and the run config (`coevolve.config`).
Importing `coevolve` pulls in nothing heavy.
"""

__version__ = "0.2.0"
