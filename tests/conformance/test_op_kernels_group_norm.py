"""(being written)"""
CASES = []
