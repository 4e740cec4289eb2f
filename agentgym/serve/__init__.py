"""Serving models over the OpenAI API: the built-in server and the vLLM launcher."""
