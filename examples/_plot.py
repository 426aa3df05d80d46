"""The loss-curve PNG of ``train_lenet.py --plot`` and ``train_gpt.py --plot`` (matplotlib, imported only here)."""
import numpy as np


def plot_losses(losses, path, title, ylabel="cross entropy"):
    """Write the loss of every step and its running mean (over a twentieth of the steps) to a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = np.arange(1, len(losses) + 1)
    k = max(1, len(losses) // 20)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, lw=0.8, alpha=0.5, label="loss")
    ax.plot(steps[k - 1:], np.convolve(losses, np.ones(k) / k, mode="valid"), lw=2, label=f"mean of {k}")
    ax.set(xlabel="step", ylabel=ylabel, title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
