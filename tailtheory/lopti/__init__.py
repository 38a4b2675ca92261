"""lopti"""
