"""Distributed retrieval-augmented generation (DRAGON, Liu et al. 2025): the two sides' document
stores, dynamic relevance, and an in-process Speculative Aggregation decoder."""
