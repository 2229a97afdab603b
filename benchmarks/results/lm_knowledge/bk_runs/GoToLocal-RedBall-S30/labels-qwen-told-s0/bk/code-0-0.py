import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    red_ball = image[5, 3, 6]  # red ball is at cell (5, 3, 6) in the image
    score = 1.0 if red_ball > 0 else 0.0
    return float(score)
