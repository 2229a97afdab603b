import numpy as np

TYPE_CHANNEL = 6    # obs["image"] channel of a ball
COLOR_CHANNEL = 11   # obs["image"] channel of the colour red


def potential(obs, caption):
    image = np.asarray(obs["image"])
    rows, cols = np.nonzero((image[TYPE_CHANNEL] > 0.5) & (image[COLOR_CHANNEL] > 0.5))
    if len(rows) == 0:
        return -1.0
    distance = int(np.min(np.abs(rows - 6) + np.abs(cols - 3)))
    return 0.5 - distance / 12.0
