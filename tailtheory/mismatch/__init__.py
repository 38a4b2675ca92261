"""mismatch"""
