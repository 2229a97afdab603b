import numpy as np
import math

def potential(obs, caption):
    image = np.asarray(obs["image"])
    red_ball = image[5, 3, 6]  # red ball is at cell (5, 3, 6) in the image
    score = math.exp(red_ball)  # Using exponential function to make the potential depend on the red ball value
    return float(score)
