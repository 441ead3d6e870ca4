"""adsp"""
