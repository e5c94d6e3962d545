"""The live router: an OpenAI-compatible gateway that routes real traffic with an llmsim heuristic or an
exported policy, over backends whose state it reads from their vLLM ``/metrics`` (docs/serving.md)."""
