import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    score = 0.0
    # Count the number of red balls in the image
    score += np.sum(image[5] == 6)  # 5 is the row index for the red ball
    return float(score)
