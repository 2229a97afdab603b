import numpy as np
import math

def potential(obs, caption):
    image = np.asarray(obs["image"])
    score = 0.0
    
    # Count the number of objects in the image
    score += np.sum(image)
    
    # Count the number of reachable objects
    reachable_objects = []
    for i in range(5, 8):
        if image[i] == 1:
            reachable_objects.append(i)
    
    # Count the number of reachable objects in front
    score += len(reachable_objects) if any(obs['vector'][0:3]) else 0
    
    # Count the number of reachable objects in back
    score += len(reachable_objects) if any(obs['vector'][3:6]) else 0
    
    # Count the number of reachable objects in left
    score += len(reachable_objects) if any(obs['vector'][6:9]) else 0
    
    # Count the number of reachable objects in right
    score += len(reachable_objects) if any(obs['vector'][9:12]) else 0
    
    # Consider the relative positions of the objects and the context provided by the caption
    if 'green box' in caption:
        score += 1
    if 'blue ball' in caption:
        score += 1
    
    return score
