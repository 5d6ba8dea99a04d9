"""The Llama family: Hugging Face LlamaForCausalLM names, trained as a causal LM."""
