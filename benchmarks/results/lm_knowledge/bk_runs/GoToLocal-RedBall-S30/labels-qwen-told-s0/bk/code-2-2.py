import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    score = 0.0
    # Count the number of red balls in the image
    red_ball_count = np.sum(image[5] == 6)  # 5 is the row index for the red ball
    score += red_ball_count
    return float(score)
