import numpy as np

def potential(obs, caption):
    image = np.asarray(obs["image"])
    score = 0.0
    # Count the number of objects in the image
    score += np.sum(image)
    # Count the number of reachable objects
    score += np.sum(image[5] + image[6] + image[7])
    # Count the number of reachable objects in front
    score += np.sum(image[5] + image[6] + image[7]) if obs['vector'][0] == 1 else 0
    # Count the number of reachable objects in back
    score += np.sum(image[5] + image[6] + image[7]) if obs['vector'][2] == 1 else 0
    # Count the number of reachable objects in left
    score += np.sum(image[5] + image[6] + image[7]) if obs['vector'][1] == 1 else 0
    # Count the number of reachable objects in right
    score += np.sum(image[5] + image[6] + image[7]) if obs['vector'][3] == 1 else 0
    return float(score) / 10.0
