"""A live team of small local models: the stale-plan scenario with a real language model as
the planner and the executor (SmolLM2-135M-Instruct run on the CPU by llama-cpp-python, the
`live` extra). Not the paper's Qwen study: a smaller model, the same question.
"""
