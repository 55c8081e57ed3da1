"""The ML core every role shares: environments and their spec, seeds, tokenizers, models, KV-cache
generation, seeded sampling, the aligned prefill, TOPLOC proofs, GRPO training, the outer step and
evaluation. torch, transformers and toploc are imported where they are first used."""
