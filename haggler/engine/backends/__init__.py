"""Model backends: local transformers models (``hf:``) and OpenAI-compatible servers (``openai:``)."""
