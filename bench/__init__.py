"""Speed benchmarks against the tools users would otherwise pick: keras-hub layers,
torch.nn.Transformer and Hugging Face generate, built to this project's shapes by bench/peers.py
(`pip install -e .[bench]`), plus the measurements behind the README's figures (input pipeline,
padding, end-to-end kt-train, loss curves in bfloat16, where a decode's time goes, beam against
greedy). Run each as a module from the repository root, e.g. `python -m bench.train_step
--repeats 5`; it adds its section, with the machine and the command, at the end of
bench/RESULTS.md, where every run keeps its own (the newest last). None runs in CI. The
reliability campaigns (fault injection, soak) are in reliability/.
"""
