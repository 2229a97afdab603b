import numpy as np

def potential(obs, caption):
    if 'image' not in obs:
        raise ValueError("The 'image' key is missing from the obs dictionary.")
    
    image = np.asarray(obs['image'])      # shape (20, 7, 7)
    score = 0.0
    
    # Count the number of visible objects in the image
    visible_objects = np.sum(image)
    # Count the number of visible walls
    walls = np.sum(image[5]) + np.sum(image[6]) + np.sum(image[7])  # keys, balls, boxes per cell
    # Count the number of visible doors
    doors = np.sum(image[8])  # doors per cell
    # Count the number of visible boxes
    boxes = np.sum(image[9])  # boxes per cell
    # Count the number of visible balls
    balls = np.sum(image[10])  # balls per cell
    # Count the number of visible keys
    keys = np.sum(image[11])  # keys per cell
    # Count the number of visible lava
    lava = np.sum(image[12])  # lava per cell
    
    # Calculate the score based on the number of visible objects
    score += visible_objects / 100.0
    # Calculate the score based on the number of visible walls
    score += walls / 10
    
    return score
