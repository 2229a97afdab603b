import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    red_ball = np.any(image[5, 3] == 6)  # check if there is a red ball in the current cell
    return float(red_ball)  # return 1 if there is a red ball, 0 otherwise
