"""Mixtral-style sparse mixture-of-experts decoder (Hugging Face MixtralForCausalLM names)."""
